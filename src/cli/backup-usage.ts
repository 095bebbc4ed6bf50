/** The help of `gantry backup` and `gantry restore` (src/cli/backup.ts). */
export const backupUsage = `gantry backup --out DIR [--objects | --no-objects]

  Backs up the PostgreSQL database at DATABASE_URL (pg_dump --format=custom, one consistent snapshot
  taken while the nodes run) and the object store's manifest (key, size, ETag of every object) into
  DIR, which must be empty or absent. The local store's objects are copied too (--no-objects: only the
  manifest); S3 objects with --objects. pg_dump (package postgresql-client, the server's major version
  or newer) must be on the PATH. The embedded database (no DATABASE_URL) is refused: stop the node and
  copy its data directory instead. A multi-host DATABASE_URL (h1:5432,h2:5432, target_session_attrs=
  read-write) is resolved to the host that is the primary when the command starts; the whole backup
  is taken from it. The backup holds the encrypted vault and signing keys: keep GANTRY_SECRET_KEY
  (and GANTRY_VAULT_KEYS) with it, in your secret store.

  --out DIR       the backup directory (created, mode 0700)
  --objects       copy the objects' bytes (default for the local store)
  --no-objects    write the manifest only (default for S3)
  -h, --help      print this help and exit
`;

export const restoreUsage = `gantry restore --from DIR [--create-db]

  Restores a gantry backup into the empty PostgreSQL database at DATABASE_URL (pg_restore, one
  transaction: all or nothing), then the backup's copied objects into the object store configured by
  GANTRY_STORAGE (those whose key is missing), and reports the manifest's keys the store lacks.
  Refuses a database that holds any table. Start the nodes on it afterwards: pending migrations are
  applied at start. A multi-host DATABASE_URL is resolved to its current primary, as for backup.
  pg_restore (package postgresql-client) must be on the PATH.

  --from DIR      the backup directory (written by gantry backup)
  --create-db     create the database named by DATABASE_URL if it does not exist
  -h, --help      print this help and exit
`;
