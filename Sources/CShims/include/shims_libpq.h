// Shims for libpq; used only by its wrapper module (Sources/Postgres).
// Nothing to wrap so far: the SQLSTATE codes libpq lacks (errcodes.h is server-only) are defined in
// Swift (PostgresError.swift), and the PG_DIAG_* field codes are plain characters passed as such.
#pragma once
#include <libpq-fe.h>
