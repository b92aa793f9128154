from rxhubs.cli import entry

entry()
