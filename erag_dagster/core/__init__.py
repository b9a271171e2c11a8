"""The leaves every layer stands on: errors and exit codes, credentials and masking, callbacks,
content hashing, storage paths, devices, Java, code versions, and the rules for reading a user's
file (``input_files``, ``input_numbers``) and writing an ``--output`` (``output_guard``).
Nothing here imports another layer of erag_dagster, Dagster, torch or pyserini."""
