/* plan: see plan.h */
#include "plan.h"
