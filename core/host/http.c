/* libcurl multi on libuv: curl tells us which sockets to watch
 * (CURLMOPT_SOCKETFUNCTION) and when to time out (CURLMOPT_TIMERFUNCTION);
 * we watch them with uv_poll_t and one uv_timer_t, and feed readiness back
 * with curl_multi_socket_action. Bodies are capped while they arrive.
 *
 * libcurl is loaded on first use: linking it costs every sandrun process
 * about 4 ms at start (its TLS, GSSAPI and LDAP dependencies), and most
 * commands make no HTTP request. */
#include "config.h"

#define CURL_DISABLE_TYPECHECK
#include <ctype.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/http.h"

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_MAX_RESPONSE (4u << 20)

#define IDLE_EASY_MAX 16

struct sr__http {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;
	sr_http_call *calls; /* running calls, for free */
	int closing;
	/* Inside curl_multi_socket_action: its callbacks (a stream's chunks)
	 * may start or end calls, which libcurl forbids from there
	 * (CURLM_RECURSIVE_API_CALL). Those wait for the kick, once the
	 * loop is back. */
	int in_curl;
	int kick_armed;
	uv_timer_t kick;
	/* Easy handles of finished requests, reset, for the next ones:
	 * making one is a large part of a request's own cost. */
	CURL *spare[IDLE_EASY_MAX];
	int n_spare;
	char *unix_socket;   /* every request goes there, or NULL */
	char *ca_file;       /* the CAs trusted in place of the system's, or NULL */
};

struct sr_http_call {
	sr__http *http;
	CURL *easy;
	struct curl_slist *headers;
	char *body_copy;
	char *buf;
	size_t len, cap, max;
	size_t body_len;      /* of body_copy */
	int too_big;
	json_t *resp_headers; /* lower-case name -> value */
	sr_done_fn done;
	void *ud;
	/* A streamed response: headers and chunks as they arrive. */
	sr_http_stream_callbacks stream;
	int streaming, headers_sent;
	uv_timer_t *idle;     /* a stream: the time allowed between two chunks */
	uint64_t idle_ms;
	char errbuf[CURL_ERROR_SIZE];
	int added;            /* in the multi handle */
	int ending;           /* finished from inside libcurl: done at the kick */
	int end_status;
	char *end_message;
	sr_http_call *next, *prev;
};

/* The libcurl functions used here, resolved by load_curl(). */
static struct {
	CURLcode (*global_init)(long);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
	CURLMcode (*multi_socket_action)(CURLM *, curl_socket_t, int, int *);
	CURLMsg *(*multi_info_read)(CURLM *, int *);
	CURLMcode (*multi_add_handle)(CURLM *, CURL *);
	CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
	CURLMcode (*multi_assign)(CURLM *, curl_socket_t, void *);
	CURLMcode (*multi_cleanup)(CURLM *);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	void (*easy_cleanup)(CURL *);
	void (*easy_reset)(CURL *);
	const char *(*easy_strerror)(CURLcode);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
} cf;

/* curl.h defines some of these as macros of its own. */
#undef curl_multi_setopt
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init cf.global_init
#define curl_multi_init cf.multi_init
#define curl_multi_setopt cf.multi_setopt
#define curl_multi_socket_action cf.multi_socket_action
#define curl_multi_info_read cf.multi_info_read
#define curl_multi_add_handle cf.multi_add_handle
#define curl_multi_remove_handle cf.multi_remove_handle
#define curl_multi_assign cf.multi_assign
#define curl_multi_cleanup cf.multi_cleanup
#define curl_easy_init cf.easy_init
#define curl_easy_setopt cf.easy_setopt
#define curl_easy_getinfo cf.easy_getinfo
#define curl_easy_cleanup cf.easy_cleanup
#define curl_easy_reset cf.easy_reset
#define curl_easy_strerror cf.easy_strerror
#define curl_slist_append cf.slist_append
#define curl_slist_free_all cf.slist_free_all

static CURL *easy_get(sr__http *h)
{
	return h->n_spare ? h->spare[--h->n_spare] : curl_easy_init();
}

/* A handle no longer in the multi handle: reset and kept, or freed. */
static void easy_put(sr__http *h, CURL *e)
{
	if (!h->closing && h->n_spare < IDLE_EASY_MAX) {
		curl_easy_reset(e);
		h->spare[h->n_spare++] = e;
	} else {
		curl_easy_cleanup(e);
	}
}

/* Loaded once for the process and never unloaded. */
static int load_curl(void)
{
	static int state; /* 0 not tried, 1 loaded, -1 failed */
	static const struct { const char *name; size_t off; } syms[] = {
#define SYM(f) { "curl_" #f, offsetof(__typeof__(cf), f) }
		SYM(global_init), SYM(multi_init), SYM(multi_setopt),
		SYM(multi_socket_action), SYM(multi_info_read),
		SYM(multi_add_handle), SYM(multi_remove_handle),
		SYM(multi_assign), SYM(multi_cleanup), SYM(easy_init),
		SYM(easy_setopt), SYM(easy_getinfo), SYM(easy_cleanup),
		SYM(easy_reset), SYM(easy_strerror), SYM(slist_append), SYM(slist_free_all),
#undef SYM
	};
	void *h;

	if (state)
		return state > 0 ? 0 : -1;
	state = -1;
	h = dlopen(SR_LIBCURL_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return -1;
	for (size_t i = 0; i < sizeof(syms) / sizeof(*syms); i++) {
		void *f = dlsym(h, syms[i].name);
		if (!f)
			return -1;
		memcpy((char *)&cf + syms[i].off, &f, sizeof(f));
	}
	state = 1;
	return 0;
}

typedef struct sock_ctx {
	uv_poll_t poll;
	curl_socket_t fd;
	sr__http *http;
} sock_ctx;

static void check_done(sr__http *h);

static int ensure(char **buf, size_t *cap, size_t need)
{
	size_t cap2;
	char *grown;

	if (need <= *cap)
		return 0;
	cap2 = *cap ? *cap : 1024;
	while (cap2 < need)
		cap2 *= 2;
	grown = realloc(*buf, cap2);
	if (!grown)
		return -1;
	*buf = grown;
	*cap = cap2;
	return 0;
}

/* A stream's status line and headers, once, before its first chunk (or
 * at its end when it has no body). */
static void stream_headers(sr_http_call *c)
{
	long code = 0;
	char *js;

	if (c->headers_sent)
		return;
	c->headers_sent = 1;
	curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
	js = json_dumps(c->resp_headers, JSON_COMPACT);
	if (c->stream.on_headers)
		c->stream.on_headers(c->ud, (int)code, js ? js : "{}");
	free(js);
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
	sr_http_call *c = ud;
	size_t n = size * nmemb;

	if (c->ending)
		return n; /* its caller is told nothing more */
	if (c->streaming) {
		if (c->len + n > c->max) {
			c->too_big = 1;
			return 0;
		}
		c->len += n;
		if (c->idle)
			uv_timer_again(c->idle);
		stream_headers(c);
		if (c->stream.on_chunk && n)
			c->stream.on_chunk(c->ud, ptr, n);
		return n;
	}
	if (c->len + n > c->max) {
		c->too_big = 1;
		return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
	}
	if (ensure(&c->buf, &c->cap, c->len + n + 1) != 0)
		return 0;
	memcpy(c->buf + c->len, ptr, n);
	c->len += n;
	c->buf[c->len] = 0;
	return n;
}

/* Each response header into c->resp_headers, its name in lower case. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
	sr_http_call *c = ud;
	size_t n = size * nmemb, k, v, e;
	char name[256];

	if (!c->resp_headers) /* a bare request keeps none */
		return n;
	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
		json_object_clear(c->resp_headers); /* after 100 or a redirect */
		return n;
	}
	for (k = 0; k < n && ptr[k] != ':'; k++)
		;
	if (k == 0 || k == n || k >= sizeof(name))
		return n;
	for (size_t i = 0; i < k; i++)
		name[i] = (char)tolower((unsigned char)ptr[i]);
	name[k] = 0;
	for (v = k + 1; v < n && (ptr[v] == ' ' || ptr[v] == '\t'); v++)
		;
	for (e = n; e > v && (ptr[e - 1] == '\r' || ptr[e - 1] == '\n' ||
			      ptr[e - 1] == ' '); e--)
		;
	json_object_set_new(c->resp_headers, name, json_stringn(ptr + v, e - v));
	return n;
}

static void unlink_call(sr_http_call *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		c->http->calls = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

static void arm_kick(sr__http *h);

/* What done receives: an sr_result, with the status code behind it for
 * sr__http_code. */
typedef struct http_result {
	sr_result r;
	long code;
} http_result;

long sr__http_code(const sr_result *res)
{
	/* Only finish's results say SR_OK; those of fail_now are bare
	 * sr_results, and never SR_OK. */
	return res->status == SR_OK ? ((const http_result *)(const void *)res)->code : 0;
}

static void finish(sr_http_call *c, int status, const char *message)
{
	http_result hr = { { sizeof(sr_result), status, message, NULL, NULL, 0 }, 0 };
	sr_result *r = &hr.r;
	char *js = NULL;
	long code = 0;

	if (c->http->in_curl) {
		if (!c->ending) {
			c->ending = 1;
			c->end_status = status;
			c->end_message = message ? strdup(message) : NULL;
			arm_kick(c->http);
		}
		return;
	}

	if (c->idle) {
		uv_timer_stop(c->idle);
		uv_close((uv_handle_t *)c->idle, free_handle);
		c->idle = NULL;
	}
	unlink_call(c);
	if (c->added)
		curl_multi_remove_handle(c->http->multi, c->easy);
	if (status == SR_OK && c->streaming) {
		stream_headers(c);
	} else if (status == SR_OK) {
		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
		hr.code = code;
		if (c->resp_headers) {
			json_t *meta = json_pack("{s:I, s:O}", "status", (json_int_t)code,
						 "headers", c->resp_headers);
			js = json_dumps(meta, JSON_COMPACT);
			json_decref(meta);
		}
		r->json = js;
		r->data = c->buf ? c->buf : "";
		r->len = c->len;
	}
	c->done(c->ud, r);
	free(js);
	free(c->end_message);
	easy_put(c->http, c->easy);
	curl_slist_free_all(c->headers);
	/* A body may carry a secret (a Daytona secret's value): not left
	 * behind in freed memory. */
	if (c->body_copy)
		explicit_bzero(c->body_copy, c->body_len);
	free(c->body_copy);
	free(c->buf);
	json_decref(c->resp_headers);
	free(c);
}

static int map_curl_error(sr_http_call *c, CURLcode rc)
{
	if (c->too_big)
		return SR_ETOOBIG;
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return SR_ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		return SR_ECONNREFUSED;
	case CURLE_OUT_OF_MEMORY:
		return SR_ENOMEM;
	case CURLE_FILESIZE_EXCEEDED:
		return SR_ETOOBIG;
	default:
		return SR_ENETWORK;
	}
}

/* url for a message: without userinfo, query or fragment, which may be
 * credentials. */
static void url_for_message(const char *url, char *out, size_t n)
{
	const char *host = url ? strstr(url, "://") : NULL;
	const char *end, *at;
	size_t len;

	if (!host) {
		snprintf(out, n, "%s", "(no URL)");
		return;
	}
	host += 3;
	end = host + strcspn(host, "/?#");
	for (at = end; at > host && at[-1] != '@'; at--)
		;
	len = (size_t)(host - url);
	snprintf(out, n, "%.*s%.*s", (int)len, url, (int)strcspn(at, "?#"), at);
}

static void check_done(sr__http *h)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(h->multi, &left))) {
		sr_http_call *c;
		char msg[CURL_ERROR_SIZE + 160], shown[160];
		const char *url = NULL;
		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
		if (c->ending)
			continue; /* the kick ends it as it was asked */
		if (m->data.result == CURLE_OK) {
			finish(c, SR_OK, NULL);
			continue;
		}
		curl_easy_getinfo(c->easy, CURLINFO_EFFECTIVE_URL, &url);
		url_for_message(url, shown, sizeof(shown));
		if (m->data.result == CURLE_FILESIZE_EXCEEDED)
			c->too_big = 1; /* announced by Content-Length */
		if (c->too_big)
			snprintf(msg, sizeof(msg),
				 "%s: response body over %zu bytes", shown, c->max);
		else
			snprintf(msg, sizeof(msg), "%s: %s", shown,
				 c->errbuf[0] ? c->errbuf :
					       curl_easy_strerror(m->data.result));
		finish(c, map_curl_error(c, m->data.result), msg);
	}
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	sock_ctx *s = p->data;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	s->http->in_curl++;
	curl_multi_socket_action(s->http->multi, s->fd, flags, &running);
	s->http->in_curl--;
	check_done(s->http);
}

static void on_poll_closed(uv_handle_t *h)
{
	free(h->data);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
		     void *socketp)
{
	sr__http *h = userp;
	sock_ctx *s = socketp;
	int events = 0;

	if (what == CURL_POLL_REMOVE) {
		if (s) {
			uv_poll_stop(&s->poll);
			uv_close((uv_handle_t *)&s->poll, on_poll_closed);
			curl_multi_assign(h->multi, fd, NULL);
		}
		return 0;
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -1;
		s->fd = fd;
		s->http = h;
		if (uv_poll_init_socket(h->loop, &s->poll, fd) != 0) {
			free(s);
			return -1;
		}
		s->poll.data = s;
		curl_multi_assign(h->multi, fd, s);
	}
	if (what & CURL_POLL_IN)
		events |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	uv_poll_start(&s->poll, events, on_poll);
	return 0;
}

static void on_timeout(uv_timer_t *t)
{
	sr__http *h = t->data;
	int running;

	h->in_curl++;
	curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	h->in_curl--;
	check_done(h);
}

/* Calls started or ended from inside libcurl, now that it is not. */
static void on_kick(uv_timer_t *t)
{
	sr__http *h = t->data;
	sr_http_call *c, *next;

	h->kick_armed = 0;
	check_done(h); /* what ended while a call was being started */
	for (c = h->calls; c; c = next) {
		next = c->next;
		if (c->ending) {
			finish(c, c->end_status, c->end_message);
		} else if (!c->added) {
			if (curl_multi_add_handle(h->multi, c->easy) == CURLM_OK)
				c->added = 1;
			else
				finish(c, SR_ENOMEM, "cannot start the HTTP request");
		}
	}
}

static void arm_kick(sr__http *h)
{
	if (!h->kick_armed) {
		h->kick_armed = 1;
		uv_timer_start(&h->kick, on_kick, 0, 0);
	}
}

static int on_timer(CURLM *multi, long ms, void *userp)
{
	sr__http *h = userp;

	if (ms < 0)
		uv_timer_stop(&h->timer);
	else
		uv_timer_start(&h->timer, on_timeout, (uint64_t)ms, 0);
	return 0;
}

sr__http *sr__http_new(uv_loop_t *loop)
{
	static int global_init;
	sr__http *h;

	if (load_curl() != 0)
		return NULL;
	if (!global_init++)
		curl_global_init(CURL_GLOBAL_DEFAULT);
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->loop = loop;
	h->multi = curl_multi_init();
	if (!h->multi) {
		free(h);
		return NULL;
	}
	uv_timer_init(loop, &h->timer);
	h->timer.data = h;
	uv_timer_init(loop, &h->kick);
	h->kick.data = h;
	curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
	curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_timer);
	curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
	/* Keep connections for reuse (keep-alive) beyond the default of 4
	 * per running transfer, which falls to nothing between bursts. */
	curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, 128L);
	return h;
}

static void on_timer_closed(uv_handle_t *t)
{
	sr__http *h = t->data;

	if (--h->closing > 0)
		return; /* the other timer's close is still to come */
	while (h->n_spare)
		curl_easy_cleanup(h->spare[--h->n_spare]);
	curl_multi_cleanup(h->multi);
	free(h->unix_socket);
	free(h->ca_file);
	free(h);
}

void sr__http_free(sr__http *h)
{
	if (!h)
		return;
	/* Each cancel unlinks its call from h->calls before freeing it. */
	while (h->calls)
		sr__http_cancel(h->calls); // NOLINT(clang-analyzer-unix.Malloc)
	uv_timer_stop(&h->timer);
	uv_timer_stop(&h->kick);
	h->closing = 2;
	uv_close((uv_handle_t *)&h->timer, on_timer_closed);
	uv_close((uv_handle_t *)&h->kick, on_timer_closed);
}

void sr__http_cancel(sr_http_call *c)
{
	if (c)
		finish(c, SR_ECANCELED, "request cancelled");
}

static void fail_now(sr_done_fn done, void *ud, int status, const char *msg)
{
	sr_result r = { sizeof(r), status, msg, NULL, NULL, 0 };

	done(ud, &r);
}

static void on_idle(uv_timer_t *t)
{
	sr_http_call *c = t->data;
	char msg[160];

	snprintf(msg, sizeof(msg), "the stream sent nothing for %llu ms",
		 (unsigned long long)c->idle_ms);
	finish(c, SR_ETIMEDOUT, msg);
}

/* The time limit of a stream is between two chunks (a followed log may
 * last): a timer restarted by every chunk. Connecting has the same
 * limit. Without memory for the timer, the limit is on the whole. */
static void stream_setup(sr_http_call *c, const sr_http_request *req,
			 const sr_http_stream_callbacks *cbs)
{
	uint64_t ms = req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS;

	memcpy(&c->stream, cbs, cbs->size < sizeof(c->stream) ? cbs->size : sizeof(c->stream));
	c->streaming = 1;
	c->idle_ms = ms;
	if (!(c->idle = malloc(sizeof(*c->idle))))
		return;
	uv_timer_init(c->http->loop, c->idle);
	c->idle->data = c;
	uv_timer_start(c->idle, on_idle, ms, ms);
	curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, 0L);
	curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)ms);
}

static sr_http_call *start(sr__http *h, const sr_http_request *req,
			   sr_done_fn done, void *ud,
			   const sr_http_stream_callbacks *stream, int bare)
{
	sr_http_call *c;
	const char *method = req->method ? req->method : "GET";

	if (!req->url || (strncmp(req->url, "http://", 7) != 0 &&
			  strncmp(req->url, "https://", 8) != 0)) {
		fail_now(done, ud, SR_EINVAL, "only http:// and https:// URLs are supported");
		return NULL;
	}
	for (const char *p = req->url; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			fail_now(done, ud, SR_EINVAL,
				 "the URL contains a space or a control character");
			return NULL;
		}
	c = calloc(1, sizeof(*c));
	if (!c || !(c->easy = easy_get(h))) {
		free(c);
		fail_now(done, ud, SR_ENOMEM, "out of memory");
		return NULL;
	}
	c->http = h;
	c->done = done;
	c->ud = ud;
	c->resp_headers = bare ? NULL : json_object();
	c->max = req->max_response ? req->max_response : DEFAULT_MAX_RESPONSE;
	for (size_t i = 0; i < req->n_headers; i++) {
		size_t n = strlen(req->headers[i].name) +
			   strlen(req->headers[i].value) + 3;
		char *line = malloc(n);
		if (!line)
			continue;
		snprintf(line, n, "%s: %s", req->headers[i].name,
			 req->headers[i].value);
		c->headers = curl_slist_append(c->headers, line);
		free(line);
	}
	/* No "Expect: 100-continue" round trip for large bodies. */
	c->headers = curl_slist_append(c->headers, "Expect:");
	curl_easy_setopt(c->easy, CURLOPT_URL, req->url);
	curl_easy_setopt(c->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->headers);
	curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(c->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c->easy, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
	curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS,
			 (long)(req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS));
	curl_easy_setopt(c->easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)c->max);
	curl_easy_setopt(c->easy, CURLOPT_USERAGENT, "sandrun/" PACKAGE_VERSION);
	if (h->unix_socket)
		curl_easy_setopt(c->easy, CURLOPT_UNIX_SOCKET_PATH, h->unix_socket);
	if (h->ca_file)
		curl_easy_setopt(c->easy, CURLOPT_CAINFO, h->ca_file);
	if (strcmp(method, "GET") != 0)
		curl_easy_setopt(c->easy, CURLOPT_CUSTOMREQUEST, method);
	if (req->body || strcmp(method, "POST") == 0 ||
	    strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
		c->body_copy = malloc(req->body_len + 1);
		if (!c->body_copy) {
			curl_easy_cleanup(c->easy);
			curl_slist_free_all(c->headers);
			json_decref(c->resp_headers);
			free(c);
			fail_now(done, ud, SR_ENOMEM, "out of memory");
			return NULL;
		}
		if (req->body_len && req->body)
			memcpy(c->body_copy, req->body, req->body_len);
		c->body_len = req->body ? req->body_len : 0;
		curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(req->body ? req->body_len : 0));
		curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body_copy);
	}
	if (stream)
		stream_setup(c, req, stream);
	if (h->in_curl) {
		/* Started from a callback of libcurl's: added at the kick. */
		arm_kick(h);
	} else if (curl_multi_add_handle(h->multi, c->easy) != CURLM_OK) {
		if (c->idle)
			uv_close((uv_handle_t *)c->idle, free_handle);
		curl_easy_cleanup(c->easy);
		curl_slist_free_all(c->headers);
		free(c->body_copy);
		json_decref(c->resp_headers);
		free(c);
		fail_now(done, ud, SR_ENOMEM, "cannot start the HTTP request");
		return NULL;
	} else {
		c->added = 1;
	}
	if (c->added && !stream && !h->calls) {
		/* Alone in the multi handle and not streamed: send now rather
		 * than at libcurl's 0 ms timer, one turn of the loop later. No
		 * callback of the caller's can run from here (a plain request's
		 * body is only buffered, and there is no other transfer); its
		 * end, even an immediate one, is reported at the kick. */
		int running;
		h->in_curl++;
		curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		h->in_curl--;
		arm_kick(h);
	}
	c->next = h->calls;
	if (h->calls)
		h->calls->prev = c;
	h->calls = c;
	return c;
}

int sr__http_set_unix_socket(sr__http *h, const char *path)
{
	char *copy = path ? strdup(path) : NULL;

	if (path && !copy)
		return SR_ENOMEM;
	free(h->unix_socket);
	h->unix_socket = copy;
	return SR_OK;
}

int sr__http_set_ca_file(sr__http *h, const char *path)
{
	char *copy = path ? strdup(path) : NULL;

	if (path && !copy)
		return SR_ENOMEM;
	free(h->ca_file);
	h->ca_file = copy;
	return SR_OK;
}

sr_http_call *sr__http_request(sr__http *h, const sr_http_request *req,
			       sr_done_fn done, void *ud)
{
	return start(h, req, done, ud, NULL, 0);
}

sr_http_call *sr__http_request_bare(sr__http *h, const sr_http_request *req,
				    sr_done_fn done, void *ud)
{
	return start(h, req, done, ud, NULL, 1);
}

sr_http_call *sr__http_stream(sr__http *h, const sr_http_request *req,
			      const sr_http_stream_callbacks *cbs, void *ud)
{
	if (cbs->size < SR_TABLE_HAS(sr_http_stream_callbacks, done) || !cbs->done)
		return NULL;
	return start(h, req, cbs->done, ud, cbs, 0);
}
