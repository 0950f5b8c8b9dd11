"""Draw what positional encodings do, as maps over the token grid:

python tools/show_encoding.py rope_mixed ape_learned irpe --sizes 14 28 --strategies none interpolate --out DIR

Writes DIR/encoding_maps.png (a row per encoding and strategy, a column per grid size and query) and
DIR/encoding_maps.json. With --checkpoint CKPT [--config CFG]: the trained model's encodings as learned, and its mean
attention distance per layer and head in DIR/attention_distance.png and .json.
(the same command as `vispe show-encoding`: vispe/cli/show_encoding.py)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vispe.cli.show_encoding import main  # noqa: E402

if __name__ == '__main__':
    main()
