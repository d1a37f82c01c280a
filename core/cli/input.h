/* Reading the runner's standard input on the loop without the thread
 * pool: a thread blocked in read(0) would hold up libuv's exit, which
 * joins its pool. */
#ifndef SR_CORE_INPUT_H
#define SR_CORE_INPUT_H

#include <stddef.h>
#include <uv.h>

typedef struct sr__input sr__input;

/* on_data gets each chunk, borrowed; len 0 once at end of input. */
typedef void (*sr__input_fn)(void *ud, const char *data, size_t len);

/* Start reading fd (a pipe, FIFO, terminal, socket, or a file or device
 * that cannot block, which is read at once). */
int sr__input_start(uv_loop_t *loop, int fd, sr__input_fn fn, void *ud,
		    sr__input **out);
/* Stop and free (safe from inside on_data). */
void sr__input_stop(sr__input *in);

#endif
