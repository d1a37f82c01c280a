/* The text of a status code (enum sr_status). */
#include "config.h"

#include "core/host/status.h"

static const char *const status_text[] = {
	"success",
	"invalid argument",
	"out of memory",
	"operation not supported",
	"not found",
	"already exists",
	"input/output error",
	"timed out",
	"cancelled",
	"connection refused",
	"too big",
	"protocol error",
	"not possible in this state",
	"not permitted",
	"network error",
	"HTTP error",
};

const char *sr__strerror(int status)
{
	if (status <= 0 && -status < (int)(sizeof(status_text) / sizeof(*status_text)))
		return status_text[-status];
	return "unknown error";
}
