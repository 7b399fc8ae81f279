# syntax=docker/dockerfile:1
# One image for every process of docker-compose.yml: the broker, the schema registry, the
# services, the catcher, the PySpark analytics job and Locust (`python -m locust`).
#
# bookworm, not the plain python:3.11-slim tag: that one moved to Debian trixie, which no
# longer ships OpenJDK 17, the Java runtime PySpark 4 is built and tested for.  Pinned by digest
# (the multi-platform index of the 3.11.14 release), so a rebuild starts from the same bytes.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# procps: Spark's launch scripts call `ps`.  /usr/share/man/man1: the JRE's post-install step
# links man pages there, and slim images do not have the directory.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# The dependencies first, from the hashed lock alone, so that a code change does not reinstall
# them and every package is the exact file the suite was run with (`make lock` writes it).
COPY requirements-image.lock ./
RUN pip install --require-hashes -r requirements-image.lock

COPY pyproject.toml README.md ./
COPY broker broker
COPY schemas schemas
COPY services services
COPY streamshop streamshop
COPY analytics analytics
# Not a package of the distribution: Locust runs it from /app (`python -m locust -f loadtest/locustfile.py`).
COPY loadtest loadtest
# Editable: the packages are imported from /app, next to their data files (schemas/*.avsc,
# analytics/log4j2.properties), which pyproject.toml does not declare as package data, so a
# plain `pip install .` would leave them out.
RUN pip install --no-deps -e .

# One state directory per process, each a named volume in docker-compose.yml.  Made here and
# owned by the user the processes run as: Docker copies that ownership into a new empty volume.
RUN useradd --create-home --uid 10001 streamshop \
 && mkdir -p /var/lib/streamshop/broker /var/lib/streamshop/orders /var/lib/streamshop/otp \
        /var/lib/streamshop/logs /var/lib/streamshop/sms-sender /var/lib/streamshop/email-sender \
        /var/lib/streamshop/analytics /var/lib/streamshop/secure \
 && chown -R streamshop:streamshop /var/lib/streamshop
USER streamshop

CMD ["streamshop", "--help"]
