"""Deployment tooling: manifest generation, offline validation, the image lock, measurements.

python -m scripts.deploy.generate   # write the files derived from the code (make manifests)
python -m scripts.deploy.validate   # render + validate every manifest offline (make deploy-check)
python -m scripts.deploy.lock       # refresh requirements.lock from .venv (make lock)
python -m scripts.deploy.measure    # RSS and shutdown time of each service (sizes the pods)
"""
