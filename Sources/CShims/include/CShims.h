// Small C helpers for what Swift cannot call directly: function-like macros, variadic calls and
// constants that C headers define with #define. One header per library; each is owned by its wrapper.
#ifndef MARQUEE_CSHIMS_H
#define MARQUEE_CSHIMS_H
#include "shims_openssl.h"
#include "shims_libevent.h"
#include "shims_libpq.h"
#include "shims_network.h"
#include "shims_network_server.h"
#endif
