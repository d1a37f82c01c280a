/* sandrun-shim watch DIR (shim/watch.c). */
#ifndef SR_SHIM_WATCH_H
#define SR_SHIM_WATCH_H

/* sandrun-shim watch [--for SECONDS] DIR (argv[1] is "watch"): print the
 * relay requests in DIR as they appear; returns the exit status. */
int shim_watch_main(int argc, char **argv);

#endif
