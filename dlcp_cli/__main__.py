import sys

from dlcp_cli.main import main

sys.exit(main())
