"""`python -m shardopt`: the same CLI as the `shardopt` command."""

from shardopt.cli.main import main

if __name__ == "__main__":
    main()
