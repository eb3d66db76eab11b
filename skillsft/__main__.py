import sys

from skillsft.cli import main

sys.exit(main())
