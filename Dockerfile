# No `# syntax=` line: BuildKit would fetch that frontend from a registry; the built-in one does.
# The images of docker-compose.yml, as targets of one file:
#   broker  the bundled broker alone (requirements-broker.lock: no Spark, no Kafka client library)
#   app     every other process: the schema registry, the services, the catcher, the PySpark
#           analytics job, the console tools and Locust (requirements-image.lock); the default.
#
# STREAMSHOP_BASE_IMAGE is the Python image both start from.  The default is the official one, bookworm rather
# than the plain python:3.11-slim tag (that moved to Debian trixie, which no longer ships OpenJDK
# 17, the Java runtime PySpark 4 is built and tested for), pinned by digest (the multi-platform
# index of the 3.11.14 release) so a rebuild starts from the same bytes.  Any Debian bookworm
# image with Python 3.11 and pip works: `docker build --build-arg STREAMSHOP_BASE_IMAGE=...`, or the
# variable of the same name for docker-compose.yml (compose/local.env: one made by compose/local/base.sh).
ARG STREAMSHOP_BASE_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${STREAMSHOP_BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# One state directory per process, each a named volume in docker-compose.yml.  Made here and
# owned by the user the processes run as: Docker copies that ownership into a new empty volume.
RUN useradd --create-home --uid 10001 streamshop \
 && mkdir -p /var/lib/streamshop/broker /var/lib/streamshop/orders /var/lib/streamshop/otp \
        /var/lib/streamshop/logs /var/lib/streamshop/sms-sender /var/lib/streamshop/email-sender \
        /var/lib/streamshop/analytics /var/lib/streamshop/secure \
 && chown -R streamshop:streamshop /var/lib/streamshop

# The compiled parts (setup.py): the broker's record walk and the analytics source's Avro decoder,
# built where a C compiler is, so neither image carries one; without them the broker and the
# analytics job would fall back to their slower Python twins.
# A base with Debian's own Python (compose/local/base.sh) has no C headers: libpython3.11-dev.
FROM base AS compiled
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && { python -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))' \
      || apt-get install -y --no-install-recommends libpython3.11-dev; } \
 && rm -rf /var/lib/apt/lists/* \
 && pip install "setuptools>=77"
COPY setup.py ./
COPY broker/protocol/_recordwalk.c broker/protocol/
COPY analytics/_avrovm.c analytics/
RUN python setup.py build_ext --inplace

FROM base AS broker
# The dependencies first, from the hashed lock alone, so that a code change does not reinstall
# them and every package is the exact file the suite was run with (`make lock` writes it).
COPY requirements-broker.lock ./
RUN pip install --require-hashes -r requirements-broker.lock
COPY pyproject.toml setup.py README.md ./
COPY contracts contracts
COPY kit kit
COPY schemas schemas
COPY broker broker
COPY registry registry
COPY services services
COPY analytics analytics
COPY streamshop streamshop
COPY --from=compiled /app/broker/protocol/*.so broker/protocol/
# Editable: the packages are imported from /app; pyproject.toml declares their data files
# (schemas/*.avsc, analytics/log4j2.properties, the dashboard's page) as package data too.
RUN pip install --no-deps -e .
USER streamshop
CMD ["streamshop", "broker", "--help"]

FROM base AS app
# procps: Spark's launch scripts call `ps`.  /usr/share/man/man1: the JRE's post-install step
# links man pages there, and slim images do not have the directory.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY requirements-image.lock ./
RUN pip install --require-hashes -r requirements-image.lock
COPY pyproject.toml setup.py README.md ./
COPY contracts contracts
COPY kit kit
COPY schemas schemas
COPY broker broker
COPY registry registry
COPY services services
COPY analytics analytics
COPY streamshop streamshop
# Not a package of the distribution: Locust runs it from /app (`python -m locust -f loadtest/locustfile.py`).
COPY loadtest loadtest
COPY --from=compiled /app/broker/protocol/*.so broker/protocol/
COPY --from=compiled /app/analytics/*.so analytics/
RUN pip install --no-deps -e .
USER streamshop
CMD ["streamshop", "--help"]
