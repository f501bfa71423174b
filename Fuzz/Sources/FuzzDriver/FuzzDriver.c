// Declarations only (include/FuzzDriver.h); a C target needs a source file.
#include "FuzzDriver.h"
