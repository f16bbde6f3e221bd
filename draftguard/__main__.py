from draftguard.cli import entry

entry()
