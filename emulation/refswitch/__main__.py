import sys

from emulation.refswitch.cli import main

sys.exit(main())
