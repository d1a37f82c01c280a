# make_edge_cert DIR: a test CA (DIR/ca.pem) and the emulated tunnel edges'
# certificate (DIR/edge.pem, DIR/edge.key) for *.ngrok-free.app and
# *.trycloudflare.com. Fails the test when openssl cannot make them.
make_edge_cert() {
	mkdir -p "$1"
	(cd "$1" &&
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
			-subj "/CN=sandrun test CA" &&
		openssl req -newkey rsa:2048 -nodes -keyout edge.key -out edge.csr \
			-subj "/CN=sandrun test edge" &&
		printf 'subjectAltName=DNS:*.ngrok-free.app,DNS:*.trycloudflare.com\n' >ext &&
		openssl x509 -req -in edge.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
			-out edge.pem -days 2 -extfile ext) >"$1/openssl.out" 2>&1 ||
		{ fail "a test certificate is made"; cat "$1/openssl.out"; finish; exit 1; }
}
