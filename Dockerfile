# The workbench image (server + CLI). Sandboxed rollouts use bubblewrap inside it for now.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/whale
COPY . .
RUN pip install --no-cache-dir -e .
EXPOSE 8000
CMD ["whale", "serve", "--host", "0.0.0.0"]
