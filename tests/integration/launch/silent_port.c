/* A TCP port that accepts connections (the kernel's backlog) but never says a word: an
 * SSH node that hangs in the handshake, for the connect-timeout test.
 *   silent_port ADDR    prints the port, then holds it until stdin closes (at most 120 s) */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: silent_port ADDR\n");
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (fd < 0 || inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
        perror("silent_port");
        return 1;
    }
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    printf("%d\n", ntohs(sa.sin_port));
    fflush(stdout);
    struct pollfd p = {.fd = 0, .events = POLLIN};
    poll(&p, 1, 120000);
    return 0;
}
