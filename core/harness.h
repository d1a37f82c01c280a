/* Checked calls into harness plugins. */
#ifndef SR_CORE_HARNESS_H
#define SR_CORE_HARNESS_H

#include <jansson.h>

#include "core/loader.h"

/* The harness's describe answer (a new reference; an empty object when
 * the plugin offers none or answers no JSON object). */
json_t *sr__harness_describe(sr__plugin *p);

#endif
