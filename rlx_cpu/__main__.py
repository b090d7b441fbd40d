"""``python -m rlx_cpu <command>``.

Commands:
  train   train the example CNN on synthetic digits (``train --help``)
  config  print build and runtime facts
"""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "train":
        from .training import main as train_main
        return train_main(rest)
    if cmd == "config":
        from .config import show_config
        show_config()
        return 0
    print(f"python -m rlx_cpu: unknown command {cmd!r}\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
