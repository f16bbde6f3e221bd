import sys

from draftguard.cli import main

sys.exit(main())
