/* The few wolfSSL facts that live in its headers' macros and enums, as plain functions for
 * the Rust stack (src/wolf.rs): the TLS 1.3 methods, the I/O callbacks that route every
 * byte through the engine's socket wrapper, and the negotiated group, signature schemes and
 * cipher suite as IANA code points. Compiled against build/wolfssl (its options.h). */

#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/wolfio.h>
#include <wolfssl/error-ssl.h>
#include <wolfssl/openssl/evp.h>
#include <wolfssl/openssl/ec.h>
#include <wolfssl/wolfcrypt/asn.h>

/* Defined in Rust: read / write through the connection's Wire. They return the bytes
 * moved, 0 when the peer closed, -1 on an error, -2 on the socket's timeout. */
extern int pqlab_wolf_read(void *wire, char *buf, int sz);
extern int pqlab_wolf_write(void *wire, const char *buf, int sz);
/* Defined in Rust: one SSLKEYLOGFILE line. */
extern void pqlab_wolf_keylog(const char *line);

static int io_code(int n)
{
    if (n > 0)
        return n;
    if (n == 0)
        return WOLFSSL_CBIO_ERR_CONN_CLOSE;
    if (n == -2)
        return WOLFSSL_CBIO_ERR_TIMEOUT;
    return WOLFSSL_CBIO_ERR_GENERAL;
}

static int recv_cb(WOLFSSL *ssl, char *buf, int sz, void *ctx)
{
    (void)ssl;
    return io_code(pqlab_wolf_read(ctx, buf, sz));
}

static int send_cb(WOLFSSL *ssl, char *buf, int sz, void *ctx)
{
    (void)ssl;
    return io_code(pqlab_wolf_write(ctx, buf, sz));
}

static void keylog_cb(const WOLFSSL *ssl, const char *line)
{
    (void)ssl;
    pqlab_wolf_keylog(line);
}

const char *pqlab_wolf_version(void) { return wolfSSL_lib_version(); }

/* Route every allocation wolfSSL makes (XMALLOC/XFREE/XREALLOC) through the engine's
 * counting callbacks (the engine library's heap::library_*). Called before wolfSSL_Init, so
 * no block of wolfSSL's predates them. 0 on success. */
int pqlab_wolf_count_allocations(void *(*m)(size_t), void (*f)(void *),
                                 void *(*r)(void *, size_t))
{
    return wolfSSL_SetAllocators(m, f, r);
}

WOLFSSL_CTX *pqlab_wolf_ctx_new(int server, int keylog)
{
    WOLFSSL_CTX *ctx = wolfSSL_CTX_new(server ? wolfTLSv1_3_server_method()
                                              : wolfTLSv1_3_client_method());
    if (ctx == NULL)
        return NULL;
    wolfSSL_CTX_SetIORecv(ctx, recv_cb);
    wolfSSL_CTX_SetIOSend(ctx, send_cb);
    if (keylog)
        wolfSSL_CTX_set_keylog_callback(ctx, keylog_cb);
    return ctx;
}

/* Full handshakes only: no tickets (server), no session cache (both). */
void pqlab_wolf_full_handshakes(WOLFSSL_CTX *ctx, int server)
{
    if (server)
        wolfSSL_CTX_no_ticket_TLSv13(ctx);
    wolfSSL_CTX_set_session_cache_mode(ctx, WOLFSSL_SESS_CACHE_OFF);
}

void pqlab_wolf_verify(WOLFSSL_CTX *ctx, int require_peer_cert)
{
    wolfSSL_CTX_set_verify(ctx,
        require_peer_cert ? (WOLFSSL_VERIFY_PEER | WOLFSSL_VERIFY_FAIL_IF_NO_PEER_CERT)
                          : WOLFSSL_VERIFY_NONE, NULL);
}

/* A client that only reports the server's chain (`--verify report`): the first failure
 * wolfSSL's verification finds on this thread's handshake, as an X509_V_ERR code (-1 when
 * the store names none); 0 when the chain validated. */
static __thread int report_failure;

static int report_verify_cb(int preverify, WOLFSSL_X509_STORE_CTX *store)
{
    if (!preverify && report_failure == 0) {
        int err = wolfSSL_X509_STORE_CTX_get_error(store);
        report_failure = err != 0 ? err : -1;
    }
    return 1; /* go on with the handshake */
}

void pqlab_wolf_verify_report(WOLFSSL_CTX *ctx)
{
    wolfSSL_CTX_set_verify(ctx, WOLFSSL_VERIFY_PEER, report_verify_cb);
}

/* The failure noted since the last call (then cleared), and its text. */
int pqlab_wolf_take_report_failure(void)
{
    int f = report_failure;
    report_failure = 0;
    return f;
}

const char *pqlab_wolf_verify_error_string(int err)
{
    return wolfSSL_X509_verify_cert_error_string(err);
}

void pqlab_wolf_set_wire(WOLFSSL *ssl, void *wire)
{
    wolfSSL_SetIOReadCtx(ssl, wire);
    wolfSSL_SetIOWriteCtx(ssl, wire);
}

int pqlab_wolf_err_want(int err)
{
    return err == WOLFSSL_ERROR_WANT_READ || err == WOLFSSL_ERROR_WANT_WRITE;
}

int pqlab_wolf_err_zero_return(int err) { return err == WOLFSSL_ERROR_ZERO_RETURN; }

/* The IANA NamedGroup of a finished handshake (wolfSSL reports the curves by NID). */
int pqlab_wolf_group_code(WOLFSSL *ssl)
{
    int g = wolfSSL_get_negotiated_group(ssl);
    switch (g) {
    case WC_NID_X9_62_prime256v1: return 23;
    case WC_NID_secp384r1: return 24;
    case WC_NID_secp521r1: return 25;
    case WC_NID_X25519: return 29;
    case WC_NID_X448: return 30;
    default: return g;
    }
}

/* The TLS SignatureScheme of a signature type and hash NID pair. */
static int scheme(int type, int hash)
{
    switch (type) {
    case WC_NID_X9_62_id_ecPublicKey:
        return hash == WC_NID_sha384 ? 0x0503 : hash == WC_NID_sha512 ? 0x0603 : 0x0403;
    case WC_NID_rsaEncryption:
        return hash == WC_NID_sha384 ? 0x0805 : hash == WC_NID_sha512 ? 0x0806 : 0x0804;
    case WC_NID_rsassaPss:
        return hash == WC_NID_sha384 ? 0x0805 : hash == WC_NID_sha512 ? 0x0806 : 0x0804;
    case WC_NID_ED25519: return 0x0807;
    case WC_NID_ED448: return 0x0808;
    case CTC_ML_DSA_44: return 0x0904;
    case CTC_ML_DSA_65: return 0x0905;
    case CTC_ML_DSA_87: return 0x0906;
    default: return 0;
    }
}

/* The scheme this side signed with (peer = 0) or the peer's CertificateVerify used
 * (peer = 1); 0 when there was none. In TLS 1.3 RSA signs with PSS (rsae) only. */
int pqlab_wolf_sig_code(WOLFSSL *ssl, int peer)
{
    int type = 0, hash = 0;
    int ok = peer ? wolfSSL_get_peer_signature_type_nid(ssl, &type)
                  : wolfSSL_get_signature_type_nid(ssl, &type);
    if (ok != WOLFSSL_SUCCESS || type == WC_NID_undef)
        return 0;
    if (peer)
        wolfSSL_get_peer_signature_nid(ssl, &hash);
    else
        wolfSSL_get_signature_nid(ssl, &hash);
    return scheme(type, hash);
}

int pqlab_wolf_cipher_code(WOLFSSL *ssl) { return wolfSSL_get_current_cipher_suite(ssl) & 0xffff; }

const char *pqlab_wolf_cipher_iana(WOLFSSL *ssl)
{
    int suite = wolfSSL_get_current_cipher_suite(ssl);
    return wolfSSL_get_cipher_name_iana_from_suite((byte)(suite >> 8), (byte)suite);
}

/* The peer's certificates, leaf first: count, and each one's DER. */
int pqlab_wolf_peer_chain_count(WOLFSSL *ssl)
{
    WOLFSSL_X509_CHAIN *chain = wolfSSL_get_peer_chain(ssl);
    return chain ? wolfSSL_get_chain_count(chain) : 0;
}

int pqlab_wolf_peer_chain_length(WOLFSSL *ssl, int i)
{
    WOLFSSL_X509_CHAIN *chain = wolfSSL_get_peer_chain(ssl);
    return chain ? wolfSSL_get_chain_length(chain, i) : 0;
}

const unsigned char *pqlab_wolf_peer_chain_der(WOLFSSL *ssl, int i)
{
    WOLFSSL_X509_CHAIN *chain = wolfSSL_get_peer_chain(ssl);
    return chain ? wolfSSL_get_chain_cert(chain, i) : NULL;
}
