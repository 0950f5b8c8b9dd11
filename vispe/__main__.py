"""python -m vispe COMMAND ...: the ``vispe`` command (vispe/cli)."""

from vispe.cli import main

if __name__ == '__main__':
    main()
