"""Classify your own image files with a trained image classifier and print the top-k classes with their names:

python tools/infer.py [CONFIG] CKPT FILE [FILE ...] [--topk 5] [--device cpu]

CONFIG is optional (the checkpoint holds the config it was trained from). Each file is prepared as the config's test
images are; class names are the training data set's (an ImageFolder's class folders). One line per file,
`FILE: best (name p%, ...)`; a file that cannot be read is an `error: FILE: problem` line on stderr, the others are
still classified, and the exit status is then 1.
(the same command as `vispe infer`: vispe/cli/infer.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.infer import main  # noqa: E402

if __name__ == '__main__':
    main()
