/* hostfile: see hostfile.h */
#include "hostfile.h"
