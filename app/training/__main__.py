import sys

from app.training.train import main

sys.exit(main(sys.argv))
