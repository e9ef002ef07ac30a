# mm2go's developer entry points. `make test` is the README's test command and what .ci/run calls.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: build image-files image demo test test-unit vet tidy-check bench

build: ## the mm2go binary in ./bin
	go build -trimpath -ldflags '$(LDFLAGS)' -o bin/mm2go ./cmd/mm2go

image-files: ## what the Dockerfile copies: a static linux binary and the host's CA bundle
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '$(LDFLAGS)' -o bin/mm2go-linux ./cmd/mm2go
	cp /etc/ssl/certs/ca-certificates.crt bin/ca-certificates.crt

image: image-files ## the container image mm2go:latest (docker or podman)
	$${CONTAINER_TOOL:-docker} build -t mm2go:$(VERSION) -t mm2go:latest .

demo: ## replicate between two in-process clusters (no Kafka needed)
	go run ./cmd/mm2go demo

test: ## everything: unit, kfake and real-Kafka end-to-end tests (starts and stops real Kafka)
	./testbed/test.sh

test-unit: ## only what needs no real Kafka (the real-Kafka tests skip)
	go test -race -count=1 ./...

# golangci-lint v2 (.golangci.yml), built by the go command at this version on first use.
GOLANGCI_LINT ?= go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

vet: ## gofmt, go vet and golangci-lint, all clean
	gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go') | (! grep .) && go vet ./... && $(GOLANGCI_LINT) run ./...

tidy-check:
	go mod tidy && git diff --exit-code go.mod go.sum

bench: ## mm2go vs Apache MM2 vs the raw limit on two real Kafka clusters (~35 min; see README "Performance")
	go run ./bench $(BENCH_FLAGS)
