// Shims for libevent; used only by its wrapper module.
#pragma once
#include <event2/event.h>
#include <event2/http.h>
