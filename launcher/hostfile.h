#ifndef DS_HOSTFILE_H
#define DS_HOSTFILE_H
#endif
