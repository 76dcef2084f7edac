"""Where instances come from and where plans go: table pools, benchmark suite families, the DLRM dataset importer,
and TorchRec config import / plan export. Imports only the core."""
