#ifndef DS_JOBSPEC_H
#define DS_JOBSPEC_H
#endif
