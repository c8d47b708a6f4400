"""The Paimon on-disk format: types, binary rows, schemas, options, snapshots, manifests, data files, deletion
vectors."""
