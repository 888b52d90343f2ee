/*
 * A reference for benchmarks/aead_vs_openssl_speed.py: the loop of OpenSSL 3.5.4's
 * `openssl speed -evp` (apps/speed.c, EVP_Update_loop: one buffer of LEN bytes encrypted
 * in place, again and again), in two forms, built against the same libcrypto:
 *
 *   stream   what speed does for ciphers whose EVP mode is not an "AE" mode (ChaCha20-
 *            Poly1305, CTR, ECB, ChaCha20): padding off, one init, then one update per
 *            call, one final at the end;
 *   records  the same loop with the calls a TLS record layer makes per record (libssl's
 *            ssl/record/methods/tls13_meth.c): init with a fresh nonce, 13 bytes of
 *            additional data, update in place, final, read the tag (AEADs). Like libssl,
 *            it never sets the padding (OpenSSL 3.5 would re-send that setting to the
 *            provider at every init).
 *
 * speed measures per-record work only for GCM and CCM (EVP_Update_loop_aead_enc); for the
 * ciphers it streams, `records` over `stream` is what the library's own per-record work
 * costs, which no record layer avoids. The buffer starts on a 64-byte boundary, as pqlab's
 * records do. The timed calls are `run_calls`, never inlined, so an instruction counter can
 * be switched on for them alone (callgrind --toggle-collect='run_calls*').
 *
 *   evp_records CIPHER LEN SECONDS stream|records
 *
 * prints one line: {"cipher":..., "mode":..., "len":..., "calls":..., "cpu_ns":..., "ns":...}
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long clock_ns(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void fail(const char *what)
{
    fprintf(stderr, "evp_records: %s failed\n", what);
    exit(1);
}

/* `count` calls from sequence number `seq` on; returns the next sequence number. */
static __attribute__((noinline)) long long run_calls(EVP_CIPHER_CTX *ctx, int records, int aead,
                                                     int ivlen, unsigned char *buf, int len,
                                                     long long seq, int count)
{
    unsigned char iv[16] = {0}, aad[13], tag[16];
    int outl;

    memset(aad, 0xcc, sizeof(aad));
    for (int k = 0; k < count; k++) {
        if (!records) {
            if (!EVP_CipherUpdate(ctx, buf, &outl, buf, len))
                fail("update");
            continue;
        }
        seq++;
        memcpy(iv + 4, &seq, sizeof(seq));
        if (!EVP_CipherInit_ex(ctx, NULL, NULL, NULL, ivlen > 0 ? iv : NULL, 1))
            fail("nonce");
        if (aead && !EVP_CipherUpdate(ctx, NULL, &outl, aad, sizeof(aad)))
            fail("additional data");
        if (!EVP_CipherUpdate(ctx, buf, &outl, buf, len))
            fail("update");
        if (!EVP_CipherFinal_ex(ctx, buf + outl, &outl))
            fail("final");
        if (aead && !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag))
            fail("tag");
    }
    return seq;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: evp_records CIPHER LEN SECONDS stream|records\n");
        return 2;
    }
    const char *name = argv[1];
    int len = atoi(argv[2]);
    double seconds = atof(argv[3]);
    int records = strcmp(argv[4], "records") == 0;
    if (len <= 0 || len > (1 << 24) || seconds <= 0
        || (!records && strcmp(argv[4], "stream") != 0)) {
        fprintf(stderr, "evp_records: bad arguments\n");
        return 2;
    }
    EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, name, NULL);
    if (cipher == NULL)
        fail("fetch");
    int aead = (EVP_CIPHER_get_flags(cipher) & EVP_CIPH_FLAG_AEAD_CIPHER) != 0;
    int ivlen = EVP_CIPHER_get_iv_length(cipher);
    int ecb = EVP_CIPHER_get_mode(cipher) == EVP_CIPH_ECB_MODE;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    unsigned char key[64], iv[16] = {0};
    unsigned char *buf = aligned_alloc(64, ((size_t)len + 64 + 63) / 64 * 64);
    if (ctx == NULL || buf == NULL)
        fail("allocation");
    memset(key, 0x5a, sizeof(key));
    memset(buf, 0x11, (size_t)len);
    if (!EVP_CipherInit_ex(ctx, cipher, NULL, NULL, NULL, 1))
        fail("init");
    /* speed turns padding off for every cipher; a record layer needs it off for ECB only. */
    if ((!records || ecb) && !EVP_CIPHER_CTX_set_padding(ctx, 0))
        fail("padding");
    if (!EVP_CipherInit_ex(ctx, NULL, NULL, key, ivlen > 0 ? iv : NULL, 1))
        fail("key");
    long long calls = 0, seq = 0;
    long long c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
    long long limit = (long long)(seconds * 1e9);
    while (clock_ns(CLOCK_MONOTONIC) - t0 < limit) {
        seq = run_calls(ctx, records, aead, ivlen, buf, len, seq, 64);
        calls += 64;
    }
    long long ns = clock_ns(CLOCK_MONOTONIC) - t0;
    long long cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
    int outl;
    if (!records && !EVP_CipherFinal_ex(ctx, buf, &outl))
        fail("final");
    printf("{\"cipher\":\"%s\",\"mode\":\"%s\",\"len\":%d,\"calls\":%lld,\"cpu_ns\":%lld,"
           "\"ns\":%lld}\n", name, records ? "records" : "stream", len, calls, cpu, ns);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(cipher);
    free(buf);
    return 0;
}
