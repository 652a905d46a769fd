import sys

from actorq.cli import main

sys.exit(main())
