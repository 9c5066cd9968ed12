import sys

from floorline.cli import main

sys.exit(main())
