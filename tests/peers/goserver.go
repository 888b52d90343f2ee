// Command goserver is an HTTPS server on Go's crypto/tls, for pqlab's probe tests: a TLS
// peer no one in pqlab wrote. It serves GET /<n> with n bytes (anything else with a short
// page), prints "listening ADDRESS" once it accepts connections, and runs until killed.
// Standard library only: the tests build it with `go build goserver.go`.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

var curves = map[string]tls.CurveID{
	"X25519MLKEM768":     tls.X25519MLKEM768,
	"SecP256r1MLKEM768":  tls.SecP256r1MLKEM768,
	"SecP384r1MLKEM1024": tls.SecP384r1MLKEM1024,
	"X25519":             tls.X25519,
	"P-256":              tls.CurveP256,
	"P-384":              tls.CurveP384,
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	certFile := flag.String("cert", "", "certificate chain (PEM), sent as it is")
	keyFile := flag.String("key", "", "private key (PEM)")
	groups := flag.String("groups", "", "key-exchange groups in preference order, comma separated (default: Go's)")
	maxVersion := flag.String("max-version", "1.3", "highest TLS version: 1.2 or 1.3")
	keylog := flag.String("keylog", "", "append the TLS secrets to this file (SSLKEYLOGFILE)")
	flag.Parse()

	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatalf("loading the certificate: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	switch *maxVersion {
	case "1.2":
		cfg.MaxVersion = tls.VersionTLS12
	case "1.3":
		cfg.MaxVersion = tls.VersionTLS13
	default:
		log.Fatalf("-max-version %q: use 1.2 or 1.3", *maxVersion)
	}
	if *groups != "" {
		for _, name := range strings.Split(*groups, ",") {
			id, ok := curves[name]
			if !ok {
				log.Fatalf("-groups: unknown group %q", name)
			}
			cfg.CurvePreferences = append(cfg.CurvePreferences, id)
		}
	}
	if *keylog != "" {
		f, err := os.OpenFile(*keylog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			log.Fatalf("-keylog: %v", err)
		}
		cfg.KeyLogWriter = f
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	os.Stdout.Sync()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil || n < 0 || n > 1<<26 {
			fmt.Fprintln(w, "hello from Go's crypto/tls")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write([]byte(strings.Repeat("x", n)))
	})
	srv := &http.Server{Handler: handler, TLSConfig: cfg, ErrorLog: log.New(os.Stderr, "", 0)}
	log.Fatal(srv.ServeTLS(ln, "", ""))
}
