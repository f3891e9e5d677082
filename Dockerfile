# syntax=docker/dockerfile:1
# Builds the single static sluice binary; every process is a subcommand of it.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/sluice ./services/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY examples/sluice.yaml /etc/sluice/sluice.yaml
ENTRYPOINT ["/usr/local/bin/sluice"]
