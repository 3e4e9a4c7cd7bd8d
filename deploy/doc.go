// Package deploy holds keyhook's deployment kit: the container image
// (Dockerfile), Kubernetes manifests (kubernetes/, a kustomize base), a
// compose file that runs keyhook with Kafka, Redis, an OpenTelemetry
// collector, Jaeger and an example endpoint, and that endpoint's source.
//
// The only Go here is the test that checks the kit against the binary: the
// ports, probes and environment variables the manifests use must be ones
// keyhook serves and reads. Nothing imports this package.
package deploy
