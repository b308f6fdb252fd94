import sys

from processor.cli.app import main

sys.exit(main())
