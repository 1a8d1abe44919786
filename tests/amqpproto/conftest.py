"""amqpproto test configuration: the hypothesis profile and the opt-in ``rabbitmq`` marker.

The profile is registered, not loaded globally (other packages' tests keep their own settings);
amqp_strategies.CI applies it to every property test here.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("amqpproto-ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "rabbitmq: needs a real RabbitMQ; runs only when SANSMQ_RABBITMQ=host:port")
