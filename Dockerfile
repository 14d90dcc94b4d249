# The same ./build on an old-glibc baseline (manylinux2014: CentOS 7, glibc 2.17), so the frozen C library and
# loader it bundles are the oldest the project supports building with. Only the toolchain is set up here; the
# build itself is ./build, the path CI tests.
#
#   docker build --output dist .        leaves dist/publish and dist/publish-folder/
FROM quay.io/pypa/manylinux2014_x86_64 AS build

# ./build bundles the build Python's own interpreter and libpython (and PyInstaller, with ./build pyinstaller,
# needs a shared libpython too), which the image's /opt/python builds lack: build CPython 3.11 with
# --enable-shared (no RUNPATH: the library goes into /usr/local/lib, found through ld.so.conf), against
# OpenSSL 1.1 from EPEL. glibc-static links the launcher.
ARG PYTHON_VERSION=3.11.9
RUN yum install -y -q epel-release \
 && yum install -y -q glibc-static openssl11-devel zlib-devel libffi-devel expat-devel libuuid-devel \
        xz-devel bzip2-devel make gcc \
 && curl -fsSL https://www.python.org/ftp/python/${PYTHON_VERSION}/Python-${PYTHON_VERSION}.tgz | tar xz -C /tmp \
 && cd /tmp/Python-${PYTHON_VERSION} \
 && sed -i 's/PKG_CONFIG openssl /PKG_CONFIG openssl11 /g' configure \
 && ./configure -q --prefix=/usr/local --enable-shared --with-ensurepip=install \
 && make -s -j"$(nproc)" && make -s altinstall \
 && echo /usr/local/lib > /etc/ld.so.conf.d/python.conf && ldconfig \
 && rm -rf /tmp/Python-${PYTHON_VERSION}

WORKDIR /src
COPY . .
RUN rm -rf build-work dist && PUBLISH_BUILD_PYTHON=/usr/local/bin/python3.11 ./build

FROM scratch
COPY --from=build /src/dist/ /
