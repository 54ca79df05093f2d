import sys

from emulation.builtin_switch.cli import main

sys.exit(main())
