#ifndef DS_PLAN_H
#define DS_PLAN_H
#endif
