// A module whose init reports that its hardware is missing: the loader must mark it
// failed with that reason and keep going.
#include "ucs/type/status.h"

extern "C" int loom_module_init() { return static_cast<int>(loom::Status::no_device); }
