// The measurement behind statico's `SENDFILE_MIN` (statico-user/src/output.rs): the server CPU per
// response of a minimal epoll HTTP server that answers every read with a fixed head and a body of BLEN
// bytes, either copied (mode 0: one write of head+body) or from a memfd (mode 1: send(head, MSG_MORE)
// then sendfile), on loopback.
//
//   gcc -O2 -o /tmp/sendfile-probe docs/bench/sendfile-probe.c
//   for blen in 4096 12288 32768 131072; do for mode in 0 1 0 1; do
//     taskset -c 1 /tmp/sendfile-probe $mode 47000 $blen & P=$!; sleep 0.3
//     t0=$(awk '{print $14+$15}' /proc/$P/stat)
//     r=$(taskset -c 0 wrk -t1 -c50 -d4s http://127.0.0.1:47000/ | awk '/Requests\/sec/ {print $2}')
//     t1=$(awk '{print $14+$15}' /proc/$P/stat); kill $P; wait $P
//     python3 -c "print('blen $blen mode $mode', round($r), 'req/s', round(($t1-$t0)/100*1e6/($r*4), 2), 'us/req')"
//   done; done
//
// Run here (2 vCPU VM, kernel 6.18), µs of server CPU per response, copy vs sendfile: 4 KiB 10.7-11.6
// vs 12.6-14.3; 12 KiB 14.4-15.4 vs 14.1-15.5; 32 KiB 15.9-17.3 vs 13.7-14.5; 128 KiB 43.7-58.2 vs
// 35.6-36.1. Partial writes are not handled (the bodies fit the loopback socket buffer).
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODE(0 copy|1 sendfile) PORT BLEN\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]), port = atoi(argv[2]), blen = atoi(argv[3]), one = 1;
    char *body = malloc(blen);
    memset(body, 'a', blen);
    int mfd = memfd_create("body", 0);
    if (write(mfd, body, blen) != blen) return 1;
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/html\r\n\r\n", blen);
    char *full = malloc(hl + blen);
    memcpy(full, head, hl);
    memcpy(full + hl, body, blen);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    if (bind(ls, (void *)&a, sizeof a) || listen(ls, 1024)) return 1;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[256];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    char buf[16384];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, 0, 0, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                }
                continue;
            }
            if (read(fd, buf, sizeof buf) <= 0) {
                close(fd);
            } else if (mode == 0) {
                if (write(fd, full, hl + blen) != hl + blen) close(fd);
            } else {
                off_t off = 0;
                send(fd, head, hl, MSG_MORE);
                if (sendfile(fd, mfd, &off, blen) != blen) close(fd);
            }
        }
    }
}
