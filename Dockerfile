FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml ./
COPY stepscope ./stepscope
COPY trajectories ./trajectories
COPY labeling ./labeling
COPY scoring ./scoring
COPY rollouts ./rollouts
# On a GPU image install the CUDA build of torch that matches the host driver instead.
RUN pip install --no-cache-dir torch==2.13.0 && pip install --no-cache-dir -e .
COPY . .
EXPOSE 8000
