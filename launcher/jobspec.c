/* jobspec: see jobspec.h */
#include "jobspec.h"
