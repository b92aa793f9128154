"""The seeded chaos run: consumer processes under scheduled faults, checked from their ledgers (PASS/FAIL).

Users run it as ``rxhubs bench chaos --seed N --duration S`` (the command stays where users know it; it uses
the bench's figure kit). The room holds the orchestrator (``_scenario``), the seeded plan (``_plan``), the
nemesis that injects each fault (``_nemesis``), the consumer process (``_worker``), and the checker: safety
(``_check``), recovery (``_recovery``), the report (``_report``) and its plot (``_plot``). See docs/testing.md,
"Chaos run".
"""
