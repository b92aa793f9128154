"""Small Rx plumbing shared by rxhubs sources and operators (private)."""
