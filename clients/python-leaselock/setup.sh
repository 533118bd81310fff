# python-leaselock adapter: the official Kubernetes Python client (PyPI `kubernetes`
# 37.0.2) and its kubernetes.leaderelection, in a venv of fencecheck's own under the
# cache (Debian has no python3-kubernetes of that release), made by bootstrap's
# pypi_venv. Sourced by ci/bootstrap.sh, in its shell: everything here is prefixed and
# nothing exits. The check is the venv's python importing kubernetes 37.0.2.

pll_venv="$CACHE/python-leaselock/venv"
pll_version() {
  "$pll_venv/bin/python" -c 'import kubernetes, kubernetes.leaderelection.leaderelection; print(kubernetes.__version__)'
}
pypi_venv "python-leaselock adapter" "$pll_venv" 37.0.2 pll_version "kubernetes==37.0.2"
