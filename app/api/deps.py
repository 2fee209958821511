"""Typed dependencies for the routes."""

from typing import Annotated

from fastapi import Depends, Request

from app.serve.services import Services


def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
