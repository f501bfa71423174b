// Shims for libpq; used only by its wrapper module.
#pragma once
#include <libpq-fe.h>
