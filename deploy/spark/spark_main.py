"""Main file for `spark-submit` (cluster mode needs a file): runs the `txbuffer` CLI with the job's arguments.

spark-submit ... local:///opt/txbuffer/spark_main.py spark --trigger continuous-interval ...
"""

import sys

from processor.cli.app import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
