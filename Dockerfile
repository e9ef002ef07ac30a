# mm2go's container image: the static binary and CA certificates, nothing else.
#
#   make image            # builds bin/mm2go-linux (CGO_ENABLED=0), then this image as mm2go:latest
#
# No base image is pulled: the binary is built on the host with the project's Go toolchain, and
# the CA bundle is the host's (for TLS to clusters with public certificates; clusters with a
# private CA name it in the MM2 file, ssl.truststore.location).
FROM scratch
COPY bin/mm2go-linux /mm2go
COPY bin/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["/mm2go"]
CMD ["run", "-c", "/etc/mm2go/mm2.properties"]
