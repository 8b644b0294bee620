"""The `kgen` command line."""
