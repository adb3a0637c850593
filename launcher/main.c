/* dslaunch: the controller. Placeholder until planning lands. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        printf("dslaunch %s\n", DS_VERSION);
        return 0;
    }
    fprintf(stderr, "usage: dslaunch [options] JOB.ini\n");
    return 2;
}
